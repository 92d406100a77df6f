"""``python -m services.launcher.agent`` — run a node agent."""

import sys

from services.launcher.agent.app import main

sys.exit(main())
