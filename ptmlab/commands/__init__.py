"""CLI verbs: thin argument parsing over the library; one module per verb group."""
