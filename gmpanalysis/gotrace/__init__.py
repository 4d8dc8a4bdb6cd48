"""Go execution trace reader (formats of Go 1.22 - 1.27), pure Python with numpy."""

from ..errors import ClockWarning, TruncatedTraceWarning
from .reader import TABLES, GoTrace, iter_generations, parse_trace, read_trace
from .wire import UnknownVersionWarning

__all__ = [
    "TABLES",
    "ClockWarning",
    "GoTrace",
    "TruncatedTraceWarning",
    "UnknownVersionWarning",
    "iter_generations",
    "parse_trace",
    "read_trace",
]
