"""Stand-in for bitbake's hash-equivalence client package (see ../../README.md)."""
