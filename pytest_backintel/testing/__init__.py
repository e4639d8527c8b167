"""Test helpers shipped with the plugin, importable by any project that tests with it."""
