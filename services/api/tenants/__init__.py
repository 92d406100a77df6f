"""Tenants: who may do what. Users and their roles, groups (what VC access lists name),
bearer tokens and their scopes, the audit log; and ``auth``, which every slice imports
to know who is asking."""
