"""``python -m services.api`` — run the API service."""

import sys

from services.api.app import main

sys.exit(main())
