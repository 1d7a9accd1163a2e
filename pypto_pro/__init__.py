"""pypto_pro: Professional mode of pypto (``import pypto_pro.language as pl``)."""
