"""Running trials: checks made once a session starts, before the first analyst request."""
