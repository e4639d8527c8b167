"""A store for any database SQLAlchemy reaches by URL, written only against the public store
interface (`stores.base`, `stores.owner`) and proved by the conformance suite
(`stores.conformance`).

Registered as `sqlalchemy`: `sqlalchemy:<url>` names the server (or `BACKINTEL_SQLALCHEMY_URL`).
Each item is a database of its own on that server, loaded from the dataset's Parquet, or, for a
source of your own (`dataset: {sqlalchemy: URL}`), your database used in place; the analyst
logs in as a per-item user that may only SELECT it. The admin recipes exist for the MySQL
family (MySQL, MariaDB); another dialect is refused at session setup with its name.
"""

from stores.sqlalchemy.store import SQLAlchemyItem, SQLAlchemyStore

__all__ = ["SQLAlchemyItem", "SQLAlchemyStore"]
