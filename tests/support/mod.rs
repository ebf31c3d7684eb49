//! Test support shared by the integration tests.
#![allow(dead_code)]

pub mod kube_api;
pub mod kube_controllers;
pub mod kube_objects;
