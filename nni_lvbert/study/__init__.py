"""Does the search find better BERTs? `lvbert study ranking | search | downstream` (see each module)."""
