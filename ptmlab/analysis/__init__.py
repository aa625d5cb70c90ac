"""Looking inside models: head/layer ablation, attention patterns, attention vs importance, layer-wise anomaly."""
