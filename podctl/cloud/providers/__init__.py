"""The slice providers (cloud/provider.py's SliceProvider), one module each; chosen by name
from cloud/provider.py's PROVIDERS."""
