//! The control API client the CLI uses: one HTTP/1.1 request per Unix
//! socket connection, JSON in and out, and a JSON Lines reader for the
//! `run-local` stream.
//!
//! This module owns talking to the socket and turning error answers back
//! into [`ClientError`]s. It must not know what the commands do with the
//! answers, nor how the node computes them.

use super::api::ApiError;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use tokio::net::UnixStream;

/// Bytes per chunk of a streamed upload.
const UPLOAD_CHUNK: usize = 64 * 1024;

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no node is running on {socket} ({source}); start one with `gleaner node`", socket = .socket.display())]
    NotRunning {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("control connection: {0}")]
    Http(#[from] hyper::Error),
    #[error("control request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the node answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("cannot understand the node's answer: {0}")]
    Decode(#[from] serde_json::Error),
    /// Reading the file to upload, or writing the answer, failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ClientError {
    /// True when there is no node to talk to (no socket, or nobody listening).
    pub fn is_not_running(&self) -> bool {
        matches!(self, ClientError::NotRunning { .. })
    }
}

/// A client of one node's control socket.
#[derive(Debug, Clone)]
pub struct ControlClient {
    socket: PathBuf,
}

impl ControlClient {
    pub fn new(socket: &Path) -> ControlClient {
        ControlClient {
            socket: socket.to_path_buf(),
        }
    }

    /// Sends one request and returns the response once its head is in;
    /// error statuses become [`ClientError::Api`].
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<Response<Incoming>, ClientError> {
        let body = Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed();
        self.send_body(method, path, body, content_type).await
    }

    /// [`Self::send`] with any body (a streamed upload).
    pub async fn send_body(
        &self,
        method: Method,
        path: &str,
        body: BoxBody<Bytes, std::io::Error>,
        content_type: &str,
    ) -> Result<Response<Incoming>, ClientError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| ClientError::NotRunning {
                    socket: self.socket.clone(),
                    source,
                })?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // The connection task ends with the response body; it needs no owner
        // beyond this request.
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "control connection ended with an error");
            }
        });
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "gleaner")
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(body)?;
        let response = sender.send_request(request).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        let message = serde_json::from_slice::<ApiError>(&bytes)
            .map(|e| e.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Err(ClientError::Api { status, message })
    }

    /// `GET path`, decoding a JSON answer.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let response = self
            .send(Method::GET, path, Vec::new(), "application/json")
            .await?;
        decode(response).await
    }

    /// `DELETE path`, decoding a JSON answer.
    pub async fn delete_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let response = self
            .send(Method::DELETE, path, Vec::new(), "application/json")
            .await?;
        decode(response).await
    }

    /// `POST path` with a JSON body, decoding a JSON answer.
    pub async fn post_json<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        decode(self.post(path, body).await?).await
    }

    /// `POST path` with a JSON body whose answer is a stream of JSON lines
    /// (`run-local`, `batch wait`).
    pub async fn post_stream<B: Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<LineReader, ClientError> {
        Ok(LineReader::new(self.post(path, body).await?))
    }

    /// `POST path` with `body` as JSON.
    async fn post<B: Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<Response<Incoming>, ClientError> {
        let body = serde_json::to_vec(body)?;
        self.send(Method::POST, path, body, "application/json")
            .await
    }

    /// `GET path`, returning the body as text.
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let response = self
            .send(Method::GET, path, Vec::new(), "text/plain")
            .await?;
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `GET path`, writing the body to `out` as it arrives (an export
    /// bigger than memory); returns the bytes written.
    pub async fn get_into(
        &self,
        path: &str,
        out: &mut (dyn std::io::Write + Send),
    ) -> Result<u64, ClientError> {
        let response = self
            .send(Method::GET, path, Vec::new(), "text/plain")
            .await?;
        let mut body = response.into_body();
        let mut written = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                out.write_all(&data)?;
                written += data.len() as u64;
            }
        }
        out.flush()?;
        Ok(written)
    }

    /// `POST path` with the bytes of `file` streamed as the body (read in
    /// chunks on a blocking thread), decoding a JSON answer.
    pub async fn post_reader<T: DeserializeOwned>(
        &self,
        path: &str,
        mut file: impl std::io::Read + Send + 'static,
    ) -> Result<T, ClientError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(8);
        std::thread::spawn(move || loop {
            let mut buf = vec![0u8; UPLOAD_CHUNK];
            let chunk = match file.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(Frame::data(Bytes::from(buf)))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
            let failed = chunk.is_err();
            if tx.blocking_send(chunk).is_err() || failed {
                return;
            }
        });
        let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed();
        let response = self
            .send_body(Method::POST, path, body, "text/plain")
            .await?;
        decode(response).await
    }

    /// `POST path` with a text body, decoding a JSON answer.
    pub async fn post_text<T: DeserializeOwned>(
        &self,
        path: &str,
        text: String,
    ) -> Result<T, ClientError> {
        let response = self
            .send(Method::POST, path, text.into_bytes(), "text/plain")
            .await?;
        decode(response).await
    }
}

async fn decode<T: DeserializeOwned>(response: Response<Incoming>) -> Result<T, ClientError> {
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&bytes)?)
}

/// Reads a JSON Lines body one value at a time.
#[derive(Debug)]
pub struct LineReader {
    body: Incoming,
    buf: Vec<u8>,
}

impl LineReader {
    pub fn new(response: Response<Incoming>) -> LineReader {
        LineReader {
            body: response.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next value, or `None` at the end of the body.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ClientError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None => return Ok(None),
            }
        }
    }
}
