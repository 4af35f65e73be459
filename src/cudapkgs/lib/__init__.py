"""The evaluation language: lazy attribute sets, fixed points, scopes, attribute paths, versions, records.

As Nixpkgs' lib/, it imports nothing of cudapkgs outside itself (tests/test_layout.py checks).
"""
