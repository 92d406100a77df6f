"""An MPI allreduce over every rank mpirun started: each rank contributes its rank + 1, so
every rank must print the same sum, n(n+1)/2, and where it ran.

    mpirun -np 4 python allreduce.py          (inside a Corral `framework: mpi` job)

With ``--bytes N`` it also times an allreduce of N bytes of float64 and rank 0 prints its
bus bandwidth (``2 (n-1)/n * size / time``, as nccl-tests count it).
"""

from __future__ import annotations

import argparse
import os
import socket
import time

from mpi4py import MPI


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=0, help="also time an allreduce of this many bytes")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    worker = f"{os.environ.get('CORRAL_TASK_ROLE', '?')}-{os.environ.get('CORRAL_TASK_INDEX', '?')}"
    print(f"rank={rank} size={size} sum={total} host={socket.gethostname()} task={worker}", flush=True)
    if args.bytes:
        _bandwidth(comm, args.bytes)


def _bandwidth(comm: MPI.Intracomm, nbytes: int) -> None:
    import numpy as np  # only for the timing: the sum above needs nothing but mpi4py

    send = np.ones(max(1, nbytes // 8), dtype=np.float64)
    receive = np.empty_like(send)
    comm.Allreduce(send, receive, op=MPI.SUM)  # warm-up: connections are made lazily
    comm.Barrier()
    rounds = 5
    started = time.perf_counter()
    for _ in range(rounds):
        comm.Allreduce(send, receive, op=MPI.SUM)
    seconds = (time.perf_counter() - started) / rounds
    size = comm.Get_size()
    if comm.Get_rank() == 0:
        bus = 2 * (size - 1) / size * send.nbytes / seconds
        print(
            f"allreduce_bytes={send.nbytes} seconds={seconds:.6f} bus_bandwidth_MBps={bus / 1e6:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
