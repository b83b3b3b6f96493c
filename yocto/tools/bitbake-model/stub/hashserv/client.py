"""Stand-in: bb.siggen imports hashserv.client; recipe parsing never calls it."""
