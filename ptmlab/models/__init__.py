"""The model zoo, per-architecture structure maps, adapters and the loader that restores modified models."""
