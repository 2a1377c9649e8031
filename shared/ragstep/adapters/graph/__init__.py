"""Knowledge-graph stores (the :class:`~ragstep.ports.GraphStore` port)."""
