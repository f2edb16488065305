"""Drop-ins for other libraries' APIs, computed by mxlab (mxlab.compat.microxcaling)."""
