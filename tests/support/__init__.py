"""Plain helpers and data shared by test modules (fixtures live in the conftest.py files).

No test module imports another test module: what two of them share is here."""
