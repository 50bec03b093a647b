"""The learned partition policy's foundations: the exact key of a measured plan (``key.py``) and
the append-only database of measured plans (``db.py``). No IREE here."""
