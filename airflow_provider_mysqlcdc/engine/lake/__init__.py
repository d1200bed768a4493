"""The output: where snapshot records, the changelog and
the mirror live, their manifests, and the mirror refresh."""
