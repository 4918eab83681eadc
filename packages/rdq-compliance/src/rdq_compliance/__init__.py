"""The rdq storage compliance kit."""
