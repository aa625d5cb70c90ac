"""Modelling code copied into exported model directories (imports only torch and transformers, never ptmlab)."""
