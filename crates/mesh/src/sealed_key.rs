//! A private key sealed with a password as `cosign generate-key-pair` writes it (PEM
//! `ENCRYPTED SIGSTORE PRIVATE KEY`, formerly `ENCRYPTED COSIGN PRIVATE KEY`). Its body is JSON, the
//! format of go-securesystemslib's `encrypted` package (sigstore/cosign `pkg/cosign/keys.go` calls
//! `encrypted.Encrypt` on the PKCS#8 DER): scrypt derives a 32-byte key from the password and the
//! salt, and NaCl secretbox (XSalsa20-Poly1305) seals the DER under a 24-byte nonce; every byte
//! string is standard base64. Pure: the password is given, never read here.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Key, Nonce, XSalsa20Poly1305};
use serde::Deserialize;

/// The PEM labels cosign writes for a sealed key.
pub(crate) const SEALED_LABELS: [&str; 2] = [
    "ENCRYPTED SIGSTORE PRIVATE KEY",
    "ENCRYPTED COSIGN PRIVATE KEY",
];

/// The most memory scrypt may take for one key (128·r·N bytes): cosign's own parameters take
/// 32 MiB; a key file asking for more is refused before any work, so that it cannot stall a converge.
const SCRYPT_MEMORY_MAX: u64 = 256 << 20;

#[derive(Deserialize)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Deserialize)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

/// Why a sealed key did not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// The body is not the format above (the words say what).
    Malformed(String),
    /// The box did not open: the password is not this key's (or the file was changed).
    WrongPassword,
}

fn decode(what: &str, text: &str) -> Result<Vec<u8>, OpenError> {
    STANDARD
        .decode(text.trim())
        .map_err(|e| OpenError::Malformed(format!("its {what} is not base64 ({e})")))
}

/// The PKCS#8 DER sealed in `body` (the PEM's decoded bytes) under `password`.
pub(crate) fn open(body: &[u8], password: &[u8]) -> Result<Vec<u8>, OpenError> {
    let sealed: Sealed = serde_json::from_slice(body).map_err(|e| {
        OpenError::Malformed(format!("its body is not cosign's sealed-key JSON ({e})"))
    })?;
    if sealed.kdf.name != "scrypt" {
        return Err(OpenError::Malformed(format!(
            "its key derivation is {:?}, not scrypt",
            sealed.kdf.name
        )));
    }
    if sealed.cipher.name != "nacl/secretbox" {
        return Err(OpenError::Malformed(format!(
            "its cipher is {:?}, not nacl/secretbox",
            sealed.cipher.name
        )));
    }
    let KdfParams { n, r, p } = sealed.kdf.params;
    if !n.is_power_of_two() || n < 2 {
        return Err(OpenError::Malformed(format!(
            "its scrypt N ({n}) is not a power of two"
        )));
    }
    if 128 * u64::from(r) * n > SCRYPT_MEMORY_MAX || p == 0 || p > 16 {
        return Err(OpenError::Malformed(format!(
            "its scrypt parameters (N {n}, r {r}, p {p}) ask for more work than a key needs (cosign writes N 32768, r 8, p 1)"
        )));
    }
    let salt = decode("salt", &sealed.kdf.salt)?;
    let nonce = decode("nonce", &sealed.cipher.nonce)?;
    if nonce.len() != 24 {
        return Err(OpenError::Malformed(format!(
            "its nonce is {} bytes, not 24",
            nonce.len()
        )));
    }
    let ciphertext = decode("ciphertext", &sealed.ciphertext)?;
    let params = scrypt::Params::new(n.trailing_zeros() as u8, r, p, 32)
        .map_err(|e| OpenError::Malformed(format!("its scrypt parameters: {e}")))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, &salt, &params, &mut key)
        .map_err(|e| OpenError::Malformed(format!("scrypt: {e}")))?;
    XSalsa20Poly1305::new(Key::from_slice(&key))
        .decrypt(Nonce::from_slice(&nonce), ciphertext.as_slice())
        .map_err(|_| OpenError::WrongPassword)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Seal as go-securesystemslib does (small scrypt parameters, to be quick).
    fn seal(plain: &[u8], password: &[u8], log_n: u8) -> Vec<u8> {
        let salt = [7u8; 32];
        let nonce = [9u8; 24];
        let params = scrypt::Params::new(log_n, 8, 1, 32).unwrap();
        let mut key = [0u8; 32];
        scrypt::scrypt(password, &salt, &params, &mut key).unwrap();
        let ciphertext = XSalsa20Poly1305::new(Key::from_slice(&key))
            .encrypt(Nonce::from_slice(&nonce), plain)
            .unwrap();
        serde_json::to_vec(&serde_json::json!({
            "kdf": {"name": "scrypt", "params": {"N": 1u64 << log_n, "r": 8, "p": 1}, "salt": STANDARD.encode(salt)},
            "cipher": {"name": "nacl/secretbox", "nonce": STANDARD.encode(nonce)},
            "ciphertext": STANDARD.encode(ciphertext),
        }))
        .unwrap()
    }

    #[test]
    fn opens_with_its_password_only() {
        let body = seal(b"the der", b"hunter2", 10);
        assert_eq!(open(&body, b"hunter2").unwrap(), b"the der");
        assert_eq!(open(&body, b"hunter3"), Err(OpenError::WrongPassword));
    }

    #[test]
    fn refuses_what_is_not_the_format_or_asks_too_much() {
        assert!(matches!(open(b"{}", b"x"), Err(OpenError::Malformed(_))));
        let mut body: serde_json::Value = serde_json::from_slice(&seal(b"k", b"p", 10)).unwrap();
        body["kdf"]["params"]["N"] = serde_json::json!(1u64 << 30);
        let err = open(&serde_json::to_vec(&body).unwrap(), b"p").unwrap_err();
        assert!(
            matches!(&err, OpenError::Malformed(m) if m.contains("more work")),
            "{err:?}"
        );
        body["kdf"]["params"]["N"] = serde_json::json!(1000);
        assert!(matches!(
            open(&serde_json::to_vec(&body).unwrap(), b"p"),
            Err(OpenError::Malformed(m)) if m.contains("power of two")
        ));
    }
}
