"""Does torch.cuda.synchronize() wait for kernels another thread queues while it waits?
A thread keeps two ~1 s kernels queued on a side stream; the main thread synchronizes
three times and says how long each took and whether the side stream was idle after."""
import threading, time, json, os, sys
import torch

torch.cuda.init()
side = torch.cuda.Stream()
stop = threading.Event()
launched = [0]

def flood():
    events = []
    while not stop.is_set():
        events = [e for e in events if not e.query()]
        while len(events) < 2:
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000_000)  # ~1 s
                e = torch.cuda.Event(); e.record(side)
            events.append(e); launched[0] += 1
        time.sleep(0.0005)

t = threading.Thread(target=flood, daemon=True); t.start()
time.sleep(0.5)
out = []
for i in range(3):
    t0 = time.perf_counter()
    done = threading.Event()
    res = {}
    def sync():
        torch.cuda.synchronize(); res["s"] = time.perf_counter() - t0; done.set()
    threading.Thread(target=sync, daemon=True).start()
    ok = done.wait(8.0)
    out.append({"returned": ok, "seconds": res.get("s"), "side_idle_after": side.query(), "launched": launched[0]})
    print(out[-1], flush=True)
stop.set()
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "sync.json"), "w"))
os._exit(0)
