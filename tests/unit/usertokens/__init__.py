"""Unit tests of users' sealed grants: keys, records, both stores, the single-flight refresh."""
