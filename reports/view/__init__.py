"""`backintel view`: a self-contained static site over a run folder (and a baseline run)."""

from reports.view.site import ViewSite, write_view

__all__ = ["ViewSite", "write_view"]
