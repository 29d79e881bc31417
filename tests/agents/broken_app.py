"""A worker ``--app`` module that fails on import with an error the CLI does not expect (tests/consumers/test_settings_errors.py)."""

raise RuntimeError("this app module is broken on purpose")
