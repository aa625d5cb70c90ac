"""Model extraction: query generators, a client for a served victim, copy training and agreement.

The owner's side (the query detector, watermark verification) belongs to ``ptmlab.serve``; the two capabilities
share only the word lists in ``ptmlab.data.wordlists`` and never import each other.
"""
