"""Storage plugin discovery (private; the public names are re-exported by ``rdq``)."""
