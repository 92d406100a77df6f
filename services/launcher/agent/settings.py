"""The node agent reads the launcher's settings (``CORRAL_AGENT_*`` among them)."""

from services.launcher.settings import Settings

__all__ = ["Settings"]
