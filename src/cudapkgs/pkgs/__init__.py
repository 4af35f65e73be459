"""Packages built from source with `stdenv.mk_derivation`, one folder each (`pkgs/<name>/package.py`)."""
