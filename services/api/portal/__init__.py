"""The web portal: the cluster, the jobs and the alerts for people, served by the API.

Server-rendered pages (Jinja2, ``templates/``) made live by htmx and its SSE extension,
with charts by uPlot; every file the browser loads ships in ``static/`` (``vendor/``
holds the third-party ones, with their versions and hashes in ``vendor/vendor.json``).
Nothing is built and nothing is fetched from elsewhere.

The portal is a view over the API's slices: its pages read through the slices'
repositories and act through their decision modules (a cancel from the portal is
``jobs/cancellation.py``'s, as from the CLI), so a user sees and may do exactly what the
API lets them. What only the portal needs is here: sign-in sessions (``session.py``),
HTML refusals (``errors.py``), live updates (``live.py``), the queries behind its
aggregates (``repository_*.py``), and one ``routes_<page>.py`` per page.
"""
