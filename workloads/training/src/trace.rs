//! Per-iteration tensor traces generated from a [`Network`].
//!
//! An iteration is `2n + 1` steps: forward operators `0..n`, their backward in reverse
//! (`n..2n`, step `n + (n - 1 - i)` is the backward of operator `i`), and the optimizer
//! step `2n`. Each tensor is allocated just before its first step runs and freed just after
//! its last step; weights, master weights and optimizer state are *persistent*: allocated
//! before the first iteration and freed after the last.
//!
//! Lifetimes, from the operator descriptions:
//! * an operator's output is an **activation** when its own backward needs it or a
//!   consumer's backward needs it as input; it lives until the last backward that needs it.
//!   Otherwise it is **transient** and is freed after its last forward consumer;
//! * a **workspace** lives for one forward or backward step of a convolution;
//! * a **weight gradient** is allocated by its operator's backward and freed after the
//!   optimizer step (`zero_grad(set_to_none=True)`);
//! * an **activation gradient** of an operator's output is allocated by the backward of its
//!   first consumer in backward order and freed after the operator's own backward.

use crate::TrainingError;
use crate::model::{ModelConfig, Network, Source};

/// Index of a tensor in [`Trace::tensors`].
pub type TensorId = usize;

/// What a tensor holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// Working weights (fp16 under mixed precision).
    Weight,
    /// fp32 master weights of mixed precision.
    MasterWeight,
    /// Optimizer state (momentum; Adam's two moments).
    OptimizerState,
    /// The network input of one iteration (images, token ids).
    Input,
    /// An operator output kept from the forward pass for the backward pass.
    Activation,
    /// An operator output that no backward needs: freed during the forward pass.
    Transient,
    /// Scratch space of one operator step.
    Workspace,
    /// Gradient of a parameter tensor.
    WeightGradient,
    /// Gradient of an operator output.
    ActivationGradient,
}

impl TensorKind {
    /// Whether tensors of this kind live across iterations.
    pub fn is_persistent(self) -> bool {
        matches!(
            self,
            TensorKind::Weight | TensorKind::MasterWeight | TensorKind::OptimizerState
        )
    }
}

/// Which part of an iteration a step belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The forward pass.
    Forward,
    /// The backward pass.
    Backward,
    /// The optimizer step.
    Optimizer,
}

/// One step of an iteration: a forward or backward operator, or the optimizer.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Operator name (forward name; the backward step has the same name).
    pub name: String,
    /// Forward, backward or optimizer.
    pub phase: Phase,
    /// The forward operator this step belongs to (`None` for the optimizer).
    pub op: Option<usize>,
    /// FLOPs of the step.
    pub flops: f64,
    /// Bytes the step reads and writes in device memory.
    pub bytes: f64,
    /// Runs on tensor cores.
    pub tensor_core: bool,
}

/// One tensor of an iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Readable name (`layer1.0.1.conv:out`, `h.3.mlp.fc1:w`).
    pub name: String,
    /// What it holds.
    pub kind: TensorKind,
    /// Size in bytes (at least 1).
    pub size_bytes: u64,
    /// The step before which it is allocated (0 for persistent tensors).
    pub alloc_step: usize,
    /// The step after which it is freed (the last step for persistent tensors).
    pub free_step: usize,
    /// The forward operator that produces it (activations, transients).
    pub producer: Option<usize>,
    /// Steps that read it, in execution order (forward consumers, backward users).
    pub used_by: Vec<usize>,
}

/// One allocator call of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Allocate the tensor.
    Alloc(TensorId),
    /// Free the tensor.
    Free(TensorId),
}

/// The tensors and steps of one training iteration of one configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The configuration it was generated for.
    pub config: ModelConfig,
    /// Steps in execution order: forward, backward, optimizer.
    pub steps: Vec<Step>,
    /// Every tensor, persistent ones first.
    pub tensors: Vec<Tensor>,
    /// Forward operators: the tensors each reads (its inputs).
    pub op_inputs: Vec<Vec<TensorId>>,
    /// Forward operators: the tensor each produces.
    pub op_output: Vec<TensorId>,
    /// Forward operators: the tensors each one's backward needs (saved tensors).
    pub op_saved: Vec<Vec<TensorId>>,
}

impl Trace {
    /// Generates the trace of one iteration of `config`.
    pub fn generate(config: &ModelConfig) -> Trace {
        let net = config.network();
        build(config, &net)
    }

    /// Number of forward operators.
    pub fn forward_ops(&self) -> usize {
        self.op_output.len()
    }

    /// The step that runs the backward of forward operator `op`.
    pub fn backward_step(&self, op: usize) -> usize {
        let n = self.forward_ops();
        n + (n - 1 - op)
    }

    /// Bytes of persistent tensors (weights, master weights, optimizer state).
    pub fn persistent_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.kind.is_persistent())
            .map(|t| t.size_bytes)
            .sum()
    }

    /// Allocations of the persistent tensors, before the first iteration.
    pub fn setup_events(&self) -> impl Iterator<Item = Event> + '_ {
        self.persistent_ids().map(Event::Alloc)
    }

    /// Frees of the persistent tensors, after the last iteration.
    pub fn teardown_events(&self) -> impl Iterator<Item = Event> + '_ {
        self.persistent_ids().map(Event::Free)
    }

    fn persistent_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind.is_persistent())
            .map(|(id, _)| id)
    }

    /// The allocator calls of one iteration without the persistent tensors, in order: for
    /// each step, its allocations (before it runs) then its frees (after).
    pub fn iteration_events(&self) -> Vec<Event> {
        let steps = self.steps.len();
        let mut allocs = vec![Vec::new(); steps];
        let mut frees = vec![Vec::new(); steps];
        for (id, t) in self.tensors.iter().enumerate() {
            if t.kind.is_persistent() {
                continue;
            }
            allocs[t.alloc_step].push(id);
            frees[t.free_step].push(id);
        }
        let mut events = Vec::with_capacity(2 * self.tensors.len());
        for s in 0..steps {
            events.extend(allocs[s].iter().map(|&id| Event::Alloc(id)));
            events.extend(frees[s].iter().map(|&id| Event::Free(id)));
        }
        events
    }

    /// Setup, one iteration, teardown.
    pub fn all_events(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self.setup_events().collect();
        events.extend(self.iteration_events());
        events.extend(self.teardown_events());
        events
    }

    /// The most bytes live at once when every tensor is allocated and freed as the trace
    /// says (every activation kept): the peak an exact allocator would need.
    pub fn peak_live_bytes(&self) -> u64 {
        let mut live = 0u64;
        let mut peak = 0u64;
        for e in self.all_events() {
            match e {
                Event::Alloc(id) => {
                    live += self.tensors[id].size_bytes;
                    peak = peak.max(live);
                }
                Event::Free(id) => live -= self.tensors[id].size_bytes,
            }
        }
        peak
    }

    /// Total bytes of the tensors of `kind` (all of them, whatever their lifetimes).
    pub fn bytes_by_kind(&self, kind: TensorKind) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| t.size_bytes)
            .sum()
    }
}

fn build(config: &ModelConfig, net: &Network) -> Trace {
    let p = config.precision;
    let act = p.activation_bytes();
    let n = net.ops.len();
    let last = 2 * n;
    let backward_step = |op: usize| n + (n - 1 - op);
    let mut steps = Vec::with_capacity(2 * n + 1);
    let mut tensors: Vec<Tensor> = Vec::new();
    let elems_of = |s: Source| match s {
        Source::Input => net.input_elems,
        Source::Op(i) => net.ops[i].output_elems,
    };

    // Persistent tensors first.
    let mut params_total = 0u64;
    for op in &net.ops {
        if op.param_elems == 0 {
            continue;
        }
        params_total += op.param_elems;
        let mut persistent = |name: String, kind, size_bytes| {
            tensors.push(Tensor {
                name,
                kind,
                size_bytes,
                alloc_step: 0,
                free_step: last,
                producer: None,
                used_by: Vec::new(),
            })
        };
        persistent(
            format!("{}:w", op.name),
            TensorKind::Weight,
            op.param_elems * act,
        );
        if let Some(master) = p.master_bytes() {
            persistent(
                format!("{}:w32", op.name),
                TensorKind::MasterWeight,
                op.param_elems * master,
            );
        }
        for k in 0..net.optimizer.states() {
            persistent(
                format!("{}:opt{k}", op.name),
                TensorKind::OptimizerState,
                op.param_elems * p.optimizer_bytes(),
            );
        }
    }

    // The network input lives until the first operator's backward.
    let input = tensors.len();
    tensors.push(Tensor {
        name: "input".into(),
        kind: TensorKind::Input,
        size_bytes: net.input_elems * net.input_elem_bytes.unwrap_or(act),
        alloc_step: 0,
        free_step: backward_step(0),
        producer: None,
        used_by: Vec::new(),
    });

    // Consumers of each operator output.
    let mut consumers = vec![Vec::new(); n];
    for (j, op) in net.ops.iter().enumerate() {
        for s in &op.inputs {
            if let Source::Op(i) = *s {
                consumers[i].push(j);
            }
        }
    }

    // Operator outputs.
    let mut op_output = Vec::with_capacity(n);
    for (i, op) in net.ops.iter().enumerate() {
        let mut needers: Vec<usize> = consumers[i]
            .iter()
            .copied()
            .filter(|&j| net.ops[j].saves_inputs)
            .collect();
        if op.saves_output {
            needers.push(i);
        }
        let last_forward = consumers[i].iter().copied().max().unwrap_or(i);
        let (kind, free_step) = match needers.iter().min() {
            Some(&first_op) => (TensorKind::Activation, backward_step(first_op)),
            None => (TensorKind::Transient, last_forward),
        };
        let mut used_by: Vec<usize> = consumers[i].clone();
        let mut back: Vec<usize> = needers.iter().map(|&j| backward_step(j)).collect();
        back.sort_unstable();
        used_by.extend(back);
        op_output.push(tensors.len());
        tensors.push(Tensor {
            name: format!("{}:out", op.name),
            kind,
            size_bytes: (op.output_elems * act).max(1),
            alloc_step: i,
            free_step,
            producer: Some(i),
            used_by,
        });
    }
    let source_tensor = |s: Source| match s {
        Source::Input => input,
        Source::Op(i) => op_output[i],
    };
    let op_inputs: Vec<Vec<TensorId>> = net
        .ops
        .iter()
        .map(|op| op.inputs.iter().map(|&s| source_tensor(s)).collect())
        .collect();
    let op_saved: Vec<Vec<TensorId>> = net
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let mut saved = Vec::new();
            if op.saves_inputs {
                saved.extend(op_inputs[i].iter().copied());
            }
            if op.saves_output {
                saved.push(op_output[i]);
            }
            saved
        })
        .collect();
    for (i, saved) in op_saved.iter().enumerate() {
        for &t in saved {
            if t == input {
                tensors[input].used_by.push(backward_step(i));
            }
        }
    }
    for (i, inputs) in op_inputs.iter().enumerate() {
        if inputs.contains(&input) {
            tensors[input].used_by.push(i);
        }
    }
    tensors[input].used_by.sort_unstable();

    // Forward steps, workspaces, gradients.
    for (i, op) in net.ops.iter().enumerate() {
        let in_elems: u64 = op.inputs.iter().map(|&s| elems_of(s)).sum();
        let bytes = ((in_elems + op.output_elems) * act + op.param_elems * act) as f64;
        steps.push(Step {
            name: op.name.clone(),
            phase: Phase::Forward,
            op: Some(i),
            flops: op.flops,
            bytes,
            tensor_core: op.tensor_core,
        });
        if op.workspace_elems > 0 {
            for step in [i, backward_step(i)] {
                tensors.push(Tensor {
                    name: format!("{}:ws", op.name),
                    kind: TensorKind::Workspace,
                    size_bytes: op.workspace_elems * act,
                    alloc_step: step,
                    free_step: step,
                    producer: None,
                    used_by: vec![step],
                });
            }
        }
    }
    for i in (0..n).rev() {
        let op = &net.ops[i];
        let s = backward_step(i);
        steps.push(Step {
            name: op.name.clone(),
            phase: Phase::Backward,
            op: Some(i),
            flops: 2.0 * steps[i].flops,
            bytes: 2.0 * steps[i].bytes,
            tensor_core: op.tensor_core,
        });
        // Gradient of this operator's output: allocated by its first consumer in backward
        // order (the latest consumer), or here for the loss.
        let first = consumers[i].iter().copied().max();
        tensors.push(Tensor {
            name: format!("{}:grad", op.name),
            kind: TensorKind::ActivationGradient,
            size_bytes: (op.output_elems * act).max(1),
            alloc_step: first.map_or(s, backward_step),
            free_step: s,
            producer: None,
            used_by: vec![s],
        });
        if op.param_elems > 0 {
            tensors.push(Tensor {
                name: format!("{}:wgrad", op.name),
                kind: TensorKind::WeightGradient,
                size_bytes: op.param_elems * act,
                alloc_step: s,
                free_step: last,
                producer: None,
                used_by: vec![s, last],
            });
        }
    }
    let opt_state_bytes =
        net.optimizer.states() * p.optimizer_bytes() + p.master_bytes().unwrap_or(0);
    steps.push(Step {
        name: "optimizer".into(),
        phase: Phase::Optimizer,
        op: None,
        flops: net.optimizer.flops_per_param() * params_total as f64,
        bytes: (params_total * (3 * act + 2 * opt_state_bytes)) as f64,
        tensor_core: false,
    });
    // Keep the id order: persistent first (already), the rest as pushed.
    Trace {
        config: *config,
        steps,
        tensors,
        op_inputs,
        op_output,
        op_saved,
    }
}

/// Why a trace is not valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceError {
    /// A tensor is freed before it is allocated, or outside the iteration.
    BadLifetime {
        /// The tensor.
        tensor: TensorId,
    },
    /// An activation is not live from its producer's forward step to a backward step.
    ActivationNotKept {
        /// The tensor.
        tensor: TensorId,
    },
    /// A tensor is used at a step where it is not live.
    UseOutsideLifetime {
        /// The tensor.
        tensor: TensorId,
        /// The step.
        step: usize,
    },
    /// A tensor has size zero.
    ZeroSize {
        /// The tensor.
        tensor: TensorId,
    },
}

impl Trace {
    /// Checks the trace's lifetimes: every tensor has a size, is allocated before it is freed
    /// within the iteration, is live at every step that uses it, and every activation lives
    /// from its producer's forward step into the backward pass.
    ///
    /// # Errors
    ///
    /// The first [`TraceError`] found.
    pub fn validate(&self) -> Result<(), TraceError> {
        let last = self.steps.len() - 1;
        let n = self.forward_ops();
        for (id, t) in self.tensors.iter().enumerate() {
            if t.size_bytes == 0 {
                return Err(TraceError::ZeroSize { tensor: id });
            }
            if t.alloc_step > t.free_step || t.free_step > last {
                return Err(TraceError::BadLifetime { tensor: id });
            }
            if let Some(&step) = t
                .used_by
                .iter()
                .find(|&&s| s < t.alloc_step || s > t.free_step)
            {
                return Err(TraceError::UseOutsideLifetime { tensor: id, step });
            }
            if t.kind == TensorKind::Activation {
                let Some(p) = t.producer else {
                    return Err(TraceError::ActivationNotKept { tensor: id });
                };
                if t.alloc_step != p || t.free_step < n || t.free_step >= last {
                    return Err(TraceError::ActivationNotKept { tensor: id });
                }
            }
        }
        for (op, saved) in self.op_saved.iter().enumerate() {
            let s = self.backward_step(op);
            for &t in saved {
                let tensor = &self.tensors[t];
                if s < tensor.alloc_step || s > tensor.free_step {
                    return Err(TraceError::UseOutsideLifetime { tensor: t, step: s });
                }
            }
        }
        Ok(())
    }
}

/// A run of several iterations, possibly at different batch sizes, as one stream of
/// allocator calls: persistent tensors once, then each iteration, then teardown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunTrace {
    /// Allocator calls: a tensor id unique within the run, its size, alloc or free.
    pub events: Vec<RunEvent>,
    /// For each iteration, the range of `events` it covers.
    pub iterations: Vec<core::ops::Range<usize>>,
    /// The batch size of each iteration.
    pub batches: Vec<u32>,
}

/// One allocator call of a [`RunTrace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunEvent {
    /// A tensor id unique within the run.
    pub id: u64,
    /// Bytes requested.
    pub size_bytes: u64,
    /// Allocation (true) or free (false).
    pub alloc: bool,
}

impl RunTrace {
    /// One iteration per entry of `batches` of the model and precision of `config`.
    ///
    /// # Errors
    ///
    /// [`TrainingError::NoIterations`] if `batches` is empty, [`TrainingError::ZeroBatch`] if
    /// any batch size is 0.
    pub fn new(config: &ModelConfig, batches: &[u32]) -> Result<RunTrace, TrainingError> {
        if batches.is_empty() {
            return Err(TrainingError::NoIterations);
        }
        let traces = batches
            .iter()
            .map(|&b| config.with_batch(b).map(|c| Trace::generate(&c)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut events = Vec::new();
        let mut iterations = Vec::new();
        let first = &traces[0];
        let to_event = |offset: u64, trace: &Trace, e: Event| match e {
            Event::Alloc(id) => RunEvent {
                id: offset + id as u64,
                size_bytes: trace.tensors[id].size_bytes,
                alloc: true,
            },
            Event::Free(id) => RunEvent {
                id: offset + id as u64,
                size_bytes: trace.tensors[id].size_bytes,
                alloc: false,
            },
        };
        events.extend(first.setup_events().map(|e| to_event(0, first, e)));
        let mut offset = first.tensors.len() as u64;
        for trace in &traces {
            let start = events.len();
            events.extend(
                trace
                    .iteration_events()
                    .into_iter()
                    .map(|e| to_event(offset, trace, e)),
            );
            iterations.push(start..events.len());
            offset += trace.tensors.len() as u64;
        }
        events.extend(first.teardown_events().map(|e| to_event(0, first, e)));
        Ok(RunTrace {
            events,
            iterations,
            batches: batches.to_vec(),
        })
    }
}
