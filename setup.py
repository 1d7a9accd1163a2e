from setuptools import find_packages, setup

setup(
    name="pypto",
    version="0.1.0",
    description="A tile-centric tensor compiler for AI accelerators: PyTorch-like code to PTO kernels",
    python_requires=">=3.10",
    packages=find_packages(include=["pypto", "pypto.*", "pypto_pro", "pypto_pro.*"]),
    package_data={"pypto.machine": ["*.toml"], "pypto.runtime.cpu": ["include/*.hpp", "include/**/*.hpp"]},
    install_requires=["torch>=2.3", "networkx>=3", "sympy>=1.12", "numpy>=1.24", "rich>=13", "tqdm>=4.60"],
    extras_require={
        "dev": ["pytest>=7", "hypothesis>=6", "pytest-timeout>=2"],
        "npu": ["torch_npu"],
        "plot": ["matplotlib>=3.6"],     # pictures: roofline charts, timelines (pypto/runtime/plots.py)
    },
    entry_points={"torch_dynamo_backends": ["pypto = pypto.dynamo:pypto_backend"]},
)
