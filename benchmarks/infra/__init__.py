"""Infrastructure below every layer that uses it: atomic writes, folder locks, the environment
record, signed state, figures and the HTML page."""
