"""The chunk store: the durable, transactional record of chunk plans and every chunk's committed snapshot."""
