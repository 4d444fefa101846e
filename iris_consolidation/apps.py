"""App configuration."""

from django.apps import AppConfig


class IrisConsolidationConfig(AppConfig):
    """Registers the system checks and pins the auto field, so host projects never
    generate migrations for this app."""

    name = "iris_consolidation"
    label = "iris_consolidation"
    verbose_name = "Truth consolidation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
