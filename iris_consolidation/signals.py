"""Signals the app sends.

``truth_changed`` is sent once per changed truth, after the transaction that changed
it commits (never for a rolled-back write), with keyword arguments ``truth`` (the
``Truth``), ``action`` ("created", "retired", "restored", "undone"), ``reason`` (str),
``review`` (the ``ClusterReview`` or None), ``actor`` (str) and ``change`` (the
``TruthChange`` audit row). Services send it through ``services/pipeline/truth_events.py``.
"""

from django.dispatch import Signal

truth_changed = Signal()
