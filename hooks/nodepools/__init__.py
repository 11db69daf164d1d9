"""A NodePool's decision, one package: its provisioning round, its disruption methods in order, its children.

``decision.decide`` is the whole of one call; ``disruption.run`` the pass
over the methods of ``methods/`` (one file each: repair, interruption,
expiry, drift, empty, underutilized, scale-down); ``state`` what a pass
reads and writes; ``records`` the disruption records and what proves them;
``consolidation`` what the two consolidation methods share; ``children``
the Machines returned; ``leaks`` the instances no Machine owns.
"""
