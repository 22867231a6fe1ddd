"""Scaling projection: from a run's own records to rank counts and hardware it did not run on.

``dlsuite project RUN --ranks 2,8,64,512`` fits, from the run's records, an alpha-beta cost per
collective (``collectives``), the compute per step at one rank and the share of the exchange
hidden behind the backward pass (``model``), and predicts every network x strategy at each rank
count with a band from the fits' residuals (``project``); hardware what-ifs come from a site
profile's ``[network]`` table or flags (``hardware``); ``published`` reproduces published
scaling results from their stated inputs. Host side: NumPy, SciPy and onnx only, no framework.
"""
