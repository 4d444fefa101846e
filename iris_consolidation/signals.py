"""Signals the app sends.

``truth_changed`` is sent once per changed truth, after the transaction that changed
it commits (never for a rolled-back write), with keyword arguments ``truth`` (the
``Truth``), ``action`` ("created", "retired", "restored"), ``reason`` (str) and
``review`` (the ``ClusterReview`` or None).
"""

from django.dispatch import Signal

truth_changed = Signal()
