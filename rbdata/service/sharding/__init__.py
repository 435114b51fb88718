"""Sharding: one logical buffer spread over several owner actors (see :mod:`.buffer`)."""
