"""Join measured and simulated records into frames with errors side by side."""
