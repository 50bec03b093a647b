"""The learned partition policy's foundations: the exact key of a measured plan (``key.py``), the
append-only database of measured plans and their regions' times (``db.py``), its collection
(``collect.py``) and seeded random training graphs (``generate.py``). No IREE here but in collect."""
