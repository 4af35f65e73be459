"""Realisation: turning derivations into valid store paths (fetch, build, fix up, register)."""
