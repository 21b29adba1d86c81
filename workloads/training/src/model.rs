//! Layer descriptions of the five networks, as graphs of forward operators.
//!
//! A [`Network`] is a list of operators in forward execution order. Each names its inputs
//! (the network input or earlier operators' outputs), the elements of its one output, its
//! parameters, its forward FLOPs, whether it runs on tensor cores (convolutions and matrix
//! multiplies), and which tensors its backward needs: its inputs (convolution, linear,
//! batch/layer norm, GELU) and/or its output (ReLU, softmax). Shapes are the real ones
//! (torchvision ResNet v1.5, BERT-Large, GPT-2); the simplifications are listed in the
//! crate README.

use core::fmt;
use core::str::FromStr;

use crate::TrainingError;

/// One of the networks this crate describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// ResNet-50 (bottleneck stages 3-4-6-3), 224×224 images, 1000 classes.
    ResNet50,
    /// ResNet-101 (bottleneck stages 3-4-23-3), 224×224 images, 1000 classes.
    ResNet101,
    /// BERT-Large: 24 layers, hidden 1024, 16 heads, vocabulary 30522, a span (QA) head.
    BertLarge,
    /// GPT-2 Large: 36 layers, hidden 1280, 20 heads, vocabulary 50257, tied LM head.
    Gpt2Large,
    /// GPT-2 XL: 48 layers, hidden 1600, 25 heads, vocabulary 50257, tied LM head.
    Gpt2Xl,
}

impl Model {
    /// All five, in the order reports list them.
    pub const ALL: [Model; 5] = [
        Model::ResNet50,
        Model::ResNet101,
        Model::BertLarge,
        Model::Gpt2Large,
        Model::Gpt2Xl,
    ];

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Model::ResNet50 => "resnet50",
            Model::ResNet101 => "resnet101",
            Model::BertLarge => "bert-large",
            Model::Gpt2Large => "gpt2-large",
            Model::Gpt2Xl => "gpt2-xl",
        }
    }

    /// The default sequence length (transformers) — 512 for BERT-Large, 1024 for GPT-2.
    /// ResNets ignore it.
    pub fn default_seq_len(self) -> u32 {
        match self {
            Model::ResNet50 | Model::ResNet101 => 0,
            Model::BertLarge => 512,
            Model::Gpt2Large | Model::Gpt2Xl => 1024,
        }
    }

    fn max_seq_len(self) -> u32 {
        self.default_seq_len()
    }

    fn is_transformer(self) -> bool {
        !matches!(self, Model::ResNet50 | Model::ResNet101)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Model {
    type Err = TrainingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match key.as_str() {
            "resnet50" => Ok(Model::ResNet50),
            "resnet101" => Ok(Model::ResNet101),
            "bertlarge" => Ok(Model::BertLarge),
            "gpt2large" => Ok(Model::Gpt2Large),
            "gpt2xl" => Ok(Model::Gpt2Xl),
            _ => Err(TrainingError::UnknownModel { name: s.to_owned() }),
        }
    }
}

/// Numeric precision of a training run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Everything in 4-byte floats (matrix multiplies without TF32).
    Fp32,
    /// Everything in 2-byte floats, optimizer state included.
    Fp16,
    /// Automatic mixed precision: fp16 weights, activations and gradients, fp32 master
    /// weights and optimizer state.
    Mixed,
}

impl Precision {
    /// Bytes per element of activations, activation gradients and working weights.
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 | Precision::Mixed => 2,
        }
    }

    /// Bytes per parameter of the fp32 master copy (mixed precision only).
    pub fn master_bytes(self) -> Option<u64> {
        match self {
            Precision::Mixed => Some(4),
            Precision::Fp32 | Precision::Fp16 => None,
        }
    }

    /// Bytes per element of optimizer state.
    pub fn optimizer_bytes(self) -> u64 {
        match self {
            Precision::Fp16 => 2,
            Precision::Fp32 | Precision::Mixed => 4,
        }
    }

    /// Whether matrix multiplies run on half-precision tensor cores.
    pub fn half_matmul(self) -> bool {
        !matches!(self, Precision::Fp32)
    }

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Mixed => "mixed",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = TrainingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" => Ok(Precision::Fp32),
            "fp16" => Ok(Precision::Fp16),
            "mixed" | "amp" => Ok(Precision::Mixed),
            _ => Err(TrainingError::UnknownPrecision { name: s.to_owned() }),
        }
    }
}

/// The optimizer whose state lives beside the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimizer {
    /// SGD with momentum: one state tensor per parameter tensor (ResNets).
    SgdMomentum,
    /// Adam(W): two state tensors per parameter tensor (transformers).
    Adam,
}

impl Optimizer {
    /// State tensors per parameter tensor.
    pub fn states(self) -> u64 {
        match self {
            Optimizer::SgdMomentum => 1,
            Optimizer::Adam => 2,
        }
    }

    /// FLOPs per parameter of one step.
    pub fn flops_per_param(self) -> f64 {
        match self {
            Optimizer::SgdMomentum => 4.0,
            Optimizer::Adam => 12.0,
        }
    }
}

/// What a training run looks like: model, batch size, precision, sequence length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// The network.
    pub model: Model,
    /// Samples per iteration (images or sequences).
    pub batch: u32,
    /// Numeric precision.
    pub precision: Precision,
    /// Tokens per sequence (transformers; 0 for ResNets).
    pub seq_len: u32,
}

impl ModelConfig {
    /// A run of `model` at `batch` samples in `precision`, at the model's default sequence
    /// length.
    ///
    /// # Errors
    ///
    /// [`TrainingError::ZeroBatch`] if `batch` is 0.
    pub fn new(model: Model, batch: u32, precision: Precision) -> Result<Self, TrainingError> {
        if batch == 0 {
            return Err(TrainingError::ZeroBatch);
        }
        Ok(Self {
            model,
            batch,
            precision,
            seq_len: model.default_seq_len(),
        })
    }

    /// The same run at another sequence length (transformers only; ResNets keep 0).
    ///
    /// # Errors
    ///
    /// [`TrainingError::BadSequenceLength`] if `seq_len` is 0 or longer than the model's
    /// position table (512 for BERT, 1024 for GPT-2).
    pub fn with_seq_len(mut self, seq_len: u32) -> Result<Self, TrainingError> {
        if !self.model.is_transformer() {
            return Ok(self);
        }
        if seq_len == 0 || seq_len > self.model.max_seq_len() {
            return Err(TrainingError::BadSequenceLength {
                seq_len,
                max: self.model.max_seq_len(),
            });
        }
        self.seq_len = seq_len;
        Ok(self)
    }

    /// The same run at another batch size.
    ///
    /// # Errors
    ///
    /// [`TrainingError::ZeroBatch`] if `batch` is 0.
    pub fn with_batch(mut self, batch: u32) -> Result<Self, TrainingError> {
        if batch == 0 {
            return Err(TrainingError::ZeroBatch);
        }
        self.batch = batch;
        Ok(self)
    }

    /// The layer graph of this run.
    pub fn network(&self) -> Network {
        match self.model {
            Model::ResNet50 => resnet(self.batch, [3, 4, 6, 3], "resnet50"),
            Model::ResNet101 => resnet(self.batch, [3, 4, 23, 3], "resnet101"),
            Model::BertLarge => transformer(
                self.batch,
                self.seq_len,
                TransformerShape {
                    name: "bert-large",
                    layers: 24,
                    hidden: 1024,
                    heads: 16,
                    vocab: 30522,
                    positions: 512,
                    lm_head: false,
                },
            ),
            Model::Gpt2Large => transformer(
                self.batch,
                self.seq_len,
                TransformerShape {
                    name: "gpt2-large",
                    layers: 36,
                    hidden: 1280,
                    heads: 20,
                    vocab: 50257,
                    positions: 1024,
                    lm_head: true,
                },
            ),
            Model::Gpt2Xl => transformer(
                self.batch,
                self.seq_len,
                TransformerShape {
                    name: "gpt2-xl",
                    layers: 48,
                    hidden: 1600,
                    heads: 25,
                    vocab: 50257,
                    positions: 1024,
                    lm_head: true,
                },
            ),
        }
    }
}

/// Where an operator's input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The network input (images, or token ids).
    Input,
    /// The output of the operator with this index.
    Op(usize),
}

/// One forward operator of a [`Network`].
#[derive(Clone, Debug, PartialEq)]
pub struct NetOp {
    /// A readable name (`layer3.2.conv2`, `h.17.attn.softmax`).
    pub name: String,
    /// Its inputs, in order.
    pub inputs: Vec<Source>,
    /// Elements of its output.
    pub output_elems: u64,
    /// Elements of its parameters (0 for parameter-free operators and the tied LM head).
    pub param_elems: u64,
    /// Forward FLOPs (a multiply-add counts 2).
    pub flops: f64,
    /// Runs on tensor cores (convolution, matrix multiply) rather than vector units.
    pub tensor_core: bool,
    /// Its backward needs its inputs.
    pub saves_inputs: bool,
    /// Its backward needs its output.
    pub saves_output: bool,
    /// Elements of scratch space it takes for the duration of its forward and of its
    /// backward (convolution algorithms' workspace).
    pub workspace_elems: u64,
}

/// A network as a list of forward operators in execution order.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// The model's name.
    pub name: &'static str,
    /// Forward operators in execution order.
    pub ops: Vec<NetOp>,
    /// Elements of the network input.
    pub input_elems: u64,
    /// Bytes per element of the input: `Some(8)` for token ids, `None` for images (stored
    /// in the activation precision).
    pub input_elem_bytes: Option<u64>,
    /// The optimizer.
    pub optimizer: Optimizer,
}

impl Network {
    /// Total parameters.
    pub fn params(&self) -> u64 {
        self.ops.iter().map(|op| op.param_elems).sum()
    }

    /// Total forward FLOPs of one iteration.
    pub fn forward_flops(&self) -> f64 {
        self.ops.iter().map(|op| op.flops).sum()
    }
}

/// cuDNN-style scratch: as large as the output, at most 16 Mi elements.
const WORKSPACE_CAP_ELEMS: u64 = 16 << 20;

struct Builder {
    ops: Vec<NetOp>,
}

impl Builder {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        name: String,
        inputs: Vec<Source>,
        output_elems: u64,
        param_elems: u64,
        flops: f64,
        tensor_core: bool,
        saves: (bool, bool),
        workspace_elems: u64,
    ) -> Source {
        self.ops.push(NetOp {
            name,
            inputs,
            output_elems,
            param_elems,
            flops,
            tensor_core,
            saves_inputs: saves.0,
            saves_output: saves.1,
            workspace_elems,
        });
        Source::Op(self.ops.len() - 1)
    }

    fn elems(&self, s: Source, input_elems: u64) -> u64 {
        match s {
            Source::Input => input_elems,
            Source::Op(i) => self.ops[i].output_elems,
        }
    }
}

/// Convolution (bias-free) + batch norm, optionally + ReLU. Returns the last output and
/// the output spatial size. ReLU in PyTorch runs in place on the BN output; here it is a
/// separate operator whose output is saved and whose input (the BN output) is freed at once,
/// which keeps the same number of saved tensors (conv output for BN, ReLU output).
#[allow(clippy::too_many_arguments)]
fn conv_bn(
    b: &mut Builder,
    name: &str,
    x: Source,
    batch: u64,
    cin: u64,
    cout: u64,
    k: u64,
    stride: u64,
    hw_in: u64,
    relu: bool,
) -> (Source, u64) {
    let hw = hw_in / stride;
    let out = batch * cout * hw * hw;
    let conv = b.push(
        format!("{name}.conv"),
        vec![x],
        out,
        cout * cin * k * k,
        2.0 * (batch * hw * hw * cout * cin * k * k) as f64,
        true,
        (true, false),
        out.min(WORKSPACE_CAP_ELEMS),
    );
    let bn = b.push(
        format!("{name}.bn"),
        vec![conv],
        out,
        2 * cout,
        8.0 * out as f64,
        false,
        (true, false),
        0,
    );
    if !relu {
        return (bn, hw);
    }
    let r = b.push(
        format!("{name}.relu"),
        vec![bn],
        out,
        0,
        out as f64,
        false,
        (false, true),
        0,
    );
    (r, hw)
}

fn resnet(batch: u32, blocks: [usize; 4], name: &'static str) -> Network {
    let n = u64::from(batch);
    let input_elems = n * 3 * 224 * 224;
    let mut b = Builder { ops: Vec::new() };
    let (x, hw) = conv_bn(&mut b, "stem", Source::Input, n, 3, 64, 7, 2, 224, true);
    let hw_pool = hw / 2;
    let pooled = b.push(
        "stem.maxpool".into(),
        vec![x],
        n * 64 * hw_pool * hw_pool,
        0,
        9.0 * (n * 64 * hw_pool * hw_pool) as f64,
        false,
        (true, false),
        0,
    );
    let mut x = pooled;
    let mut hw = hw_pool;
    let mut cin = 64;
    for (stage, &count) in blocks.iter().enumerate() {
        let mid = 64u64 << stage;
        let cout = mid * 4;
        for block in 0..count {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let pre = format!("layer{}.{block}", stage + 1);
            let (a, _) = conv_bn(&mut b, &format!("{pre}.1"), x, n, cin, mid, 1, 1, hw, true);
            // v1.5: the stride sits on the 3×3 convolution.
            let (c, hw_out) = conv_bn(
                &mut b,
                &format!("{pre}.2"),
                a,
                n,
                mid,
                mid,
                3,
                stride,
                hw,
                true,
            );
            let (d, _) = conv_bn(
                &mut b,
                &format!("{pre}.3"),
                c,
                n,
                mid,
                cout,
                1,
                1,
                hw_out,
                false,
            );
            let identity = if block == 0 {
                conv_bn(
                    &mut b,
                    &format!("{pre}.down"),
                    x,
                    n,
                    cin,
                    cout,
                    1,
                    stride,
                    hw,
                    false,
                )
                .0
            } else {
                x
            };
            let out = n * cout * hw_out * hw_out;
            let sum = b.push(
                format!("{pre}.add"),
                vec![d, identity],
                out,
                0,
                out as f64,
                false,
                (false, false),
                0,
            );
            x = b.push(
                format!("{pre}.relu"),
                vec![sum],
                out,
                0,
                out as f64,
                false,
                (false, true),
                0,
            );
            hw = hw_out;
            cin = cout;
        }
    }
    let feat = b.elems(x, input_elems);
    let pooled = b.push(
        "avgpool".into(),
        vec![x],
        n * cin,
        0,
        feat as f64,
        false,
        (false, false),
        0,
    );
    let logits = b.push(
        "fc".into(),
        vec![pooled],
        n * 1000,
        cin * 1000 + 1000,
        2.0 * (n * cin * 1000) as f64,
        true,
        (true, false),
        0,
    );
    b.push(
        "loss".into(),
        vec![logits],
        n,
        0,
        5.0 * (n * 1000) as f64,
        false,
        (true, false),
        0,
    );
    Network {
        name,
        ops: b.ops,
        input_elems,
        input_elem_bytes: None,
        optimizer: Optimizer::SgdMomentum,
    }
}

struct TransformerShape {
    name: &'static str,
    layers: usize,
    hidden: u64,
    heads: u64,
    vocab: u64,
    positions: u64,
    /// GPT-2: a tied LM head over the whole vocabulary; BERT: a 2-way span (QA) head.
    lm_head: bool,
}

fn transformer(batch: u32, seq_len: u32, shape: TransformerShape) -> Network {
    let (b_, s, h, a) = (
        u64::from(batch),
        u64::from(seq_len),
        shape.hidden,
        shape.heads,
    );
    let tokens = b_ * s;
    let bsh = tokens * h;
    let scores = b_ * a * s * s;
    let mut b = Builder { ops: Vec::new() };
    let type_rows = if shape.lm_head { 0 } else { 2 };
    let mut x = b.push(
        "embed".into(),
        vec![Source::Input],
        bsh,
        (shape.vocab + shape.positions + type_rows) * h + if shape.lm_head { 0 } else { 2 * h },
        2.0 * bsh as f64,
        false,
        (true, false),
        0,
    );
    let linear = |b: &mut Builder, name: String, x: Source, fan_in: u64, fan_out: u64| {
        b.push(
            name,
            vec![x],
            tokens * fan_out,
            fan_in * fan_out + fan_out,
            2.0 * (tokens * fan_in * fan_out) as f64,
            true,
            (true, false),
            0,
        )
    };
    let layer_norm = |b: &mut Builder, name: String, x: Source| {
        b.push(
            name,
            vec![x],
            bsh,
            2 * h,
            8.0 * bsh as f64,
            false,
            (true, false),
            0,
        )
    };
    for l in 0..shape.layers {
        let p = format!("h.{l}");
        let ln1 = layer_norm(&mut b, format!("{p}.ln1"), x);
        let qkv = linear(&mut b, format!("{p}.attn.qkv"), ln1, h, 3 * h);
        let sc = b.push(
            format!("{p}.attn.scores"),
            vec![qkv],
            scores,
            0,
            2.0 * (b_ * s * s * h) as f64,
            true,
            (true, false),
            0,
        );
        let sm = b.push(
            format!("{p}.attn.softmax"),
            vec![sc],
            scores,
            0,
            5.0 * scores as f64,
            false,
            (false, true),
            0,
        );
        let ctx = b.push(
            format!("{p}.attn.context"),
            vec![sm, qkv],
            bsh,
            0,
            2.0 * (b_ * s * s * h) as f64,
            true,
            (true, false),
            0,
        );
        let proj = linear(&mut b, format!("{p}.attn.proj"), ctx, h, h);
        let add1 = b.push(
            format!("{p}.add1"),
            vec![proj, x],
            bsh,
            0,
            bsh as f64,
            false,
            (false, false),
            0,
        );
        let ln2 = layer_norm(&mut b, format!("{p}.ln2"), add1);
        let fc1 = linear(&mut b, format!("{p}.mlp.fc1"), ln2, h, 4 * h);
        let gelu = b.push(
            format!("{p}.mlp.gelu"),
            vec![fc1],
            4 * bsh,
            0,
            8.0 * (4 * bsh) as f64,
            false,
            (true, false),
            0,
        );
        let fc2 = linear(&mut b, format!("{p}.mlp.fc2"), gelu, 4 * h, h);
        x = b.push(
            format!("{p}.add2"),
            vec![fc2, add1],
            bsh,
            0,
            bsh as f64,
            false,
            (false, false),
            0,
        );
    }
    let head_out = if shape.lm_head {
        let lnf = layer_norm(&mut b, "ln_f".into(), x);
        // Tied to the token embedding: no parameters of its own.
        b.push(
            "lm_head".into(),
            vec![lnf],
            tokens * shape.vocab,
            0,
            2.0 * (tokens * h * shape.vocab) as f64,
            true,
            (true, false),
            0,
        )
    } else {
        linear(&mut b, "qa_head".into(), x, h, 2)
    };
    let head_elems = b.elems(head_out, 0);
    b.push(
        "loss".into(),
        vec![head_out],
        b_,
        0,
        5.0 * head_elems as f64,
        false,
        (true, false),
        0,
    );
    Network {
        name: shape.name,
        ops: b.ops,
        input_elems: tokens,
        input_elem_bytes: Some(8),
        optimizer: Optimizer::Adam,
    }
}
