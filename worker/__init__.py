"""The deleting side of jobttl: deciding, scheduling and performing deletions."""
