"""Go execution trace reader (formats of Go 1.22 - 1.27), pure Python with numpy."""

from .reader import ClockWarning, GoTrace, TruncatedTraceWarning, parse_trace, read_trace
from .wire import UnknownVersionWarning

__all__ = ["ClockWarning", "GoTrace", "TruncatedTraceWarning", "UnknownVersionWarning", "parse_trace", "read_trace"]
