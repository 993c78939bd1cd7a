"""Math problems: the seeded synthetic generator, local hub-schema loaders and the prompt format."""

# The benchmark registry registers the built-in benchmarks (and their hub schemas) on first import of hara.data.
import hara.data.catalog  # noqa: F401
