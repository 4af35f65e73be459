"""`cudaPackages.tests`: Nixpkgs' pkgs/development/cuda-modules/packages/tests/, one module per test.

Each test is a package whose build is the check (`cudapkgs test` and `cudapkgs build` run it);
those that run GPU code require the `cuda` system feature. `index.TESTS` names them and
docs/set-tests.md says which of Nixpkgs' tests have no counterpart and why.
"""
