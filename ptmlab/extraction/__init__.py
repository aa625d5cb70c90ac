"""Model extraction: query generators, a client for a served victim, copy training, agreement, watermark checks."""
