"""Workloads: the model catalog and routing (``catalog``), the MoE Dispatch/Combine layouts
(``moe_layout``), expert-parallel routing over W ranks (``ep``) and the Ulysses All-to-All layout
(``a2a_layout``). Pure numpy."""
