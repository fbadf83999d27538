"""An adversary search against real GameManagers in memory (issue 42.5): behaviours a hostile
peer composes (``behaviours``), the transport it plays them on (``network``, ``hostile``), the
coalition that votes with it (``coalition``), the invariants checked after every round
(``invariants``) and one run of a strategy (``harness``)."""
