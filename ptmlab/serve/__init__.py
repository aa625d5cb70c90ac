"""Serving: an HTTP inference API over any ptmlab run directory, with keys, quotas, audit and output policies."""
