"""Alerts: the alerter's alerts, silences and rules, read here; an acknowledge, a silence
or a rule change is a request the alerter carries out."""
