"""The Go execution trace "v2" event table (Go 1.22 - 1.27), from internal/trace/tracev2.

Event ids and argument lists never changed once introduced; newer versions only append.
Each timed event on the wire is: type byte, dt (uvarint), then its arguments (uvarints).
"""

from __future__ import annotations

import numpy as np

# id: (name, argument names after dt)
EVENTS: dict[int, tuple[str, tuple[str, ...]]] = {
    9: ("ProcsChange", ("procs", "stack")),
    10: ("ProcStart", ("p", "p_seq")),
    11: ("ProcStop", ()),
    12: ("ProcSteal", ("p", "p_seq", "m")),
    13: ("ProcStatus", ("p", "pstatus")),
    14: ("GoCreate", ("new_g", "new_stack", "stack")),
    15: ("GoCreateSyscall", ("new_g",)),
    16: ("GoStart", ("g", "g_seq")),
    17: ("GoDestroy", ()),
    18: ("GoDestroySyscall", ()),
    19: ("GoStop", ("reason_string", "stack")),
    20: ("GoBlock", ("reason_string", "stack")),
    21: ("GoUnblock", ("g", "g_seq", "stack")),
    22: ("GoSyscallBegin", ("p_seq", "stack")),
    23: ("GoSyscallEnd", ()),
    24: ("GoSyscallEndBlocked", ()),
    25: ("GoStatus", ("g", "m", "gstatus")),
    26: ("STWBegin", ("kind_string", "stack")),
    27: ("STWEnd", ()),
    28: ("GCActive", ("gc_seq",)),
    29: ("GCBegin", ("gc_seq", "stack")),
    30: ("GCEnd", ("gc_seq",)),
    31: ("GCSweepActive", ("p",)),
    32: ("GCSweepBegin", ("stack",)),
    33: ("GCSweepEnd", ("swept", "reclaimed")),
    34: ("GCMarkAssistActive", ("g",)),
    35: ("GCMarkAssistBegin", ("stack",)),
    36: ("GCMarkAssistEnd", ()),
    37: ("HeapAlloc", ("heap_alloc",)),
    38: ("HeapGoal", ("heap_goal",)),
    39: ("GoLabel", ("label_string",)),
    40: ("UserTaskBegin", ("task", "parent_task", "name_string", "stack")),
    41: ("UserTaskEnd", ("task", "stack")),
    42: ("UserRegionBegin", ("task", "name_string", "stack")),
    43: ("UserRegionEnd", ("task", "name_string", "stack")),
    44: ("UserLog", ("task", "key_string", "value_string", "stack")),
    45: ("GoSwitch", ("g", "g_seq")),  # 1.23+
    46: ("GoSwitchDestroy", ("g", "g_seq")),  # 1.23+
    47: ("GoCreateBlocked", ("new_g", "new_stack", "stack")),  # 1.23+
    48: ("GoStatusStack", ("g", "m", "gstatus", "stack")),  # 1.23+
    # experimental (GODEBUG=traceallocfree=1), inside ordinary event batches, 1.23+
    128: ("Span", ("id", "npages", "kindclass")),
    129: ("SpanAlloc", ("id", "npages", "kindclass")),
    130: ("SpanFree", ("id",)),
    131: ("HeapObject", ("id", "type")),
    132: ("HeapObjectAlloc", ("id", "type")),
    133: ("HeapObjectFree", ("id",)),
    134: ("GoroutineStack", ("id", "order")),
    135: ("GoroutineStackAlloc", ("id", "order")),
    136: ("GoroutineStackFree", ("id",)),
}
NAMES = {v[0]: k for k, v in EVENTS.items()}

EV_PROCSCHANGE = 9
EV_PROCSTART = 10
EV_PROCSTOP = 11
EV_PROCSTEAL = 12
EV_PROCSTATUS = 13
EV_GOCREATE = 14
EV_GOCREATESYSCALL = 15
EV_GOSTART = 16
EV_GODESTROY = 17
EV_GODESTROYSYSCALL = 18
EV_GOSTOP = 19
EV_GOBLOCK = 20
EV_GOUNBLOCK = 21
EV_GOSYSCALLBEGIN = 22
EV_GOSYSCALLEND = 23
EV_GOSYSCALLENDBLOCKED = 24
EV_GOSTATUS = 25
EV_STWBEGIN = 26
EV_STWEND = 27
EV_GCACTIVE = 28
EV_GCBEGIN = 29
EV_GCEND = 30
EV_GCSWEEPACTIVE = 31
EV_GCSWEEPBEGIN = 32
EV_GCSWEEPEND = 33
EV_GCMARKASSISTACTIVE = 34
EV_GCMARKASSISTBEGIN = 35
EV_GCMARKASSISTEND = 36
EV_HEAPALLOC = 37
EV_HEAPGOAL = 38
EV_GOLABEL = 39
EV_USERTASKBEGIN = 40
EV_USERTASKEND = 41
EV_USERREGIONBEGIN = 42
EV_USERREGIONEND = 43
EV_USERLOG = 44
EV_GOSWITCH = 45
EV_GOSWITCHDESTROY = 46
EV_GOCREATEBLOCKED = 47
EV_GOSTATUSSTACK = 48
EV_SPAN = 128
EV_SPANALLOC = 129
EV_SPANFREE = 130
EV_HEAPOBJECT = 131
EV_HEAPOBJECTALLOC = 132
EV_HEAPOBJECTFREE = 133
EV_GOROUTINESTACK = 134
EV_GOROUTINESTACKALLOC = 135
EV_GOROUTINESTACKFREE = 136

# structural bytes
EV_EVENT_BATCH = 1
EV_STACKS = 2
EV_STACK = 3
EV_STRINGS = 4
EV_STRING = 5
EV_CPU_SAMPLES = 6
EV_CPU_SAMPLE = 7
EV_FREQUENCY = 8
EV_EXPERIMENTAL_BATCH = 49
EV_SYNC = 50
EV_CLOCK_SNAPSHOT = 51
EV_END_OF_GENERATION = 52

# Highest timed (non-experimental) event id each header version may contain.
MAX_EVENT = {22: 44, 23: 48, 25: 48, 26: 48}
KNOWN_VERSIONS = tuple(MAX_EVENT)

# goroutine and P statuses (GoStatus / ProcStatus)
GO_RUNNABLE, GO_RUNNING, GO_SYSCALL, GO_WAITING = 1, 2, 3, 4
PROC_RUNNING, PROC_IDLE, PROC_SYSCALL, PROC_SYSCALL_ABANDONED = 1, 2, 3, 4

# "no thread / no P / none" is written as 2^64-1
NONE_ID = (1 << 64) - 1


def jump_table(version: int) -> np.ndarray:
    """Tokens an event occupies, indexed by its first byte; 0 marks a byte that cannot
    start an event in this version.

    Every uvarint ends with a byte < 0x80, and so does a type byte < 0x80: cutting the
    stream after each such byte splits it into tokens, one per varint and one per type
    byte. An event is then 1 + (1 + nargs) tokens. Experimental types (>= 0x80) have the
    continuation bit set, so the type byte and dt fall into one token: 1 + nargs.
    """
    top = MAX_EVENT.get(version, max(MAX_EVENT.values()))
    j = np.zeros(256, dtype=np.int64)
    for eid, (_, args) in EVENTS.items():
        if eid < 128 and eid <= top:
            j[eid] = 2 + len(args)
        elif eid >= 128 and version >= 23:
            j[eid] = 1 + len(args)
    return j
