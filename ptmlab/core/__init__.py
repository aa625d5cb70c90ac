"""Shared mechanics: errors, configs, registries, run directories, seeding, progress, atomic I/O."""
