"""The node agent reads the launcher's settings (``CORRAL_AGENT_*`` among them)."""

from services.launcher.settings import Settings, tidy_state_dir

__all__ = ["Settings", "tidy_state_dir"]
